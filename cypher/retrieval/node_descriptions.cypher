// Type, name and text of each node id given (missing ids are simply absent), as one row of
// parallel lists: what a retrieval returns about its nodes, without their embeddings.
UNWIND $ids AS id
MATCH (n:{{dataset}} {id: id})
RETURN collect(n.id) AS ids, collect(n.type) AS types, collect(n.name) AS names,
       collect(coalesce(n.text, n.name)) AS texts
