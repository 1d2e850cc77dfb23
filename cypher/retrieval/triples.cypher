// The relationships among the given nodes as readable triples (stored direction), for an LLM,
// as one row of parallel lists (the caller orders them). $types: only those types (null: all).
UNWIND $ids AS id
MATCH (a:{{dataset}} {{{id}}: id})-[r]->(b:{{dataset}})
WHERE b.{{id}} IN $ids AND ($types IS NULL OR type(r) IN $types)
// Names as in node_descriptions.cypher: text, '' for none, so the lists stay aligned.
RETURN collect(a.{{id}}) AS sources, collect(coalesce(toStringOrNull(a.{{name}}), '')) AS source_names,
       collect(type(r)) AS relations, collect(b.{{id}}) AS targets,
       collect(coalesce(toStringOrNull(b.{{name}}), '')) AS target_names
