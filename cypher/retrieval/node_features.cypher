// Embedding, type and name of each node id given (missing ids are simply absent).
UNWIND $ids AS id
MATCH (n:{{dataset}} {id: id})
RETURN n.id AS id, n.embedding AS embedding, n.type AS type, n.name AS name
