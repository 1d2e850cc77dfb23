// Relationships among a set of nodes (the induced subgraph), each as stored (one direction).
// One row of parallel lists: the driver handles one record of lists several times faster than
// one record per relationship, and this runs on every query.
UNWIND $ids AS id
MATCH (a:{{dataset}} {id: id})-[r]->(b:{{dataset}})
WHERE b.id IN $ids
RETURN collect(a.id) AS sources, collect(b.id) AS targets, collect(type(r)) AS relations
