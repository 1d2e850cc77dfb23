// Embedding, type and name of each node id given (missing ids are simply absent), as one row of
// parallel lists (one record per node costs the driver more than the query itself).
UNWIND $ids AS id
MATCH (n:{{dataset}} {{{id}}: id})
RETURN collect(n.{{id}}) AS ids, collect(n.{{embedding}}) AS embeddings, collect(n.{{type}}) AS types,
       collect(coalesce(toStringOrNull(n.{{name}}), '')) AS names  // as node_descriptions.cypher
