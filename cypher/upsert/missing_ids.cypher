// Which of the given ids have no node in the dataset (edges must not point at nothing).
UNWIND $ids AS id
OPTIONAL MATCH (n:{{dataset}} {id: id})
WITH id, n WHERE n IS NULL
RETURN collect(id) AS missing
