// How many nodes carry the label to adopt, how many of them have each named property (count()
// skips nulls), how many distinct ids they have, and the lengths of the given embeddings. Property
// names are parameters: n[$p] reads a property by name.
MATCH (n:{{label}})
RETURN count(n) AS nodes, count(n[$id]) AS with_id, count(DISTINCT n[$id]) AS distinct_ids,
       count(n[$name]) AS with_name,
       count(CASE WHEN $text IS NULL THEN NULL ELSE n[$text] END) AS with_text,
       count(CASE WHEN $embedding IS NULL THEN NULL ELSE n[$embedding] END) AS with_embedding,
       count(CASE WHEN $type IS NULL THEN NULL ELSE n[$type] END) AS with_type,
       collect(DISTINCT CASE WHEN $embedding IS NULL THEN NULL ELSE size(n[$embedding]) END) AS embedding_sizes
