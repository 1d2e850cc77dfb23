// The relationships among the given nodes as readable triples (stored direction), for an LLM,
// as one row of parallel lists (the caller orders them).
UNWIND $ids AS id
MATCH (a:{{dataset}} {id: id})-[r]->(b:{{dataset}})
WHERE b.id IN $ids
RETURN collect(a.id) AS sources, collect(a.name) AS source_names, collect(type(r)) AS relations,
       collect(b.id) AS targets, collect(b.name) AS target_names
