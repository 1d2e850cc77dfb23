// Relationships among a set of nodes (the induced subgraph), each as stored (one direction).
UNWIND $ids AS id
MATCH (a:{{dataset}} {id: id})-[r]->(b:{{dataset}})
WHERE b.id IN $ids
RETURN a.id AS source, b.id AS target, type(r) AS relation
