// The relationships among the adopted nodes, read only; $types (a list) keeps only those types.
MATCH (a:{{label}})-[r]->(b:{{label}})
WHERE $types IS NULL OR type(r) IN $types
RETURN a[$id] AS source, type(r) AS relation, b[$id] AS target
