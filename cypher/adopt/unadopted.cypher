// A page of the user's nodes that this dataset has not adopted yet (no id of seeder-dgl's), read
// only: the element id (used to write them within the same run), the properties the embedding is
// made from (names as parameters: n[$p] reads a property by name) and the node's labels. One row
// holding a list of maps: parallel lists from collect() would drop the nulls and lose alignment.
MATCH (n:{{label}})
WHERE n.{{id}} IS NULL
WITH n LIMIT $limit
RETURN collect({key: elementId(n), user_id: n[$id], name: n[$name],
                text: CASE WHEN $text IS NULL THEN NULL ELSE n[$text] END,
                embedding: CASE WHEN $embedding IS NULL THEN NULL ELSE n[$embedding] END,
                type: CASE WHEN $type IS NULL THEN NULL ELSE n[$type] END,
                labels: labels(n)}) AS nodes
