// Type, name, text and source id (key) of each node id given (missing ids are simply absent), as one row of
// parallel lists: what a retrieval returns about its nodes, without their embeddings.
UNWIND $ids AS id
MATCH (n:{{dataset}} {{{id}}: id})
// Names and texts of a graph adopted in place are the user's properties, maybe numbers or missing:
// as text, '' for none (collect() would drop a null and misalign the lists).
RETURN collect(n.{{id}}) AS ids, collect(n.{{type}}) AS types, collect(coalesce(toStringOrNull(n.{{name}}), '')) AS names,
       collect(coalesce(toStringOrNull(n.{{text}}), toStringOrNull(n.{{name}}), '')) AS texts,
       collect(coalesce(toStringOrNull(n.{{key}}), '')) AS keys
