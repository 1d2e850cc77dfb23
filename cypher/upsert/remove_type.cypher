// Take an old type's label off nodes whose type an upsert changes (the new one is set by
// upsert/node): a node carries one type label, as ingest wrote it.
UNWIND $ids AS id
MATCH (n:{{dataset}} {id: id})
REMOVE n:{{node_type}}
RETURN count(n) AS changed
