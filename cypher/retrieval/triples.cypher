// The relationships among the given nodes as readable triples (stored direction), for an LLM.
UNWIND $ids AS id
MATCH (a:{{dataset}} {id: id})-[r]->(b:{{dataset}})
WHERE b.id IN $ids
RETURN a.id AS source, a.name AS source_name, type(r) AS relation, b.id AS target, b.name AS target_name
ORDER BY source, relation, target
