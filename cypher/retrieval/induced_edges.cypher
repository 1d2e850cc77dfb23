// Relationships among a set of nodes (the induced subgraph), each as stored (one direction).
// The test on the far end of each relationship compares internal ids, which the relationship
// record holds: reading the label and id of b instead cost twice as much when the set has hubs
// (Prime scale: 36 ms against 13 ms). Internal ids never leave this statement, so their reuse
// after deletions (the reason id() is deprecated) cannot matter here.
// One row of parallel lists: the driver handles one record of lists several times faster than
// one record per relationship, and this runs on every query. $types: only those types (null: all).
UNWIND $ids AS id
MATCH (n:{{dataset}} {{{id}}: id})
WITH collect(n) AS nodes, collect(id(n)) AS members
UNWIND nodes AS a
MATCH (a)-[r]->(b)
WHERE id(b) IN members AND ($types IS NULL OR type(r) IN $types)
RETURN collect(a.{{id}}) AS sources, collect(b.{{id}}) AS targets, collect(type(r)) AS relations
