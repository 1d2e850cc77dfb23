// The type of each of the given nodes as stored (missing ids are simply absent): an upsert that
// changes a node's type takes the old type's label off first.
UNWIND $ids AS id
MATCH (n:{{dataset}} {id: id})
RETURN collect(id) AS ids, collect(n.type) AS types
