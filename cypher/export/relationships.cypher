// Relationships whose stored source has an id in [$lo, $hi), as [source, target, type].
MATCH (a:{{dataset}})-[r]->(b:{{dataset}})
WHERE a.id >= $lo AND a.id < $hi
RETURN a.id AS source, b.id AS target, type(r) AS relation
