// The nodes to adopt, read only: the id, name, optional text, embedding and type
// properties, and the node's other labels (its type when no type property is named).
MATCH (n:{{label}})
RETURN n[$id] AS id, n[$name] AS name,
       CASE WHEN $text IS NULL THEN NULL ELSE n[$text] END AS text,
       CASE WHEN $embedding IS NULL THEN NULL ELSE n[$embedding] END AS embedding,
       CASE WHEN $type IS NULL THEN NULL ELSE n[$type] END AS type,
       [l IN labels(n) WHERE l <> $label] AS labels
