// The adopted nodes with seeder-dgl ids in [$lo, $hi) that still carry the user's label (range
// seek on the id constraint's index), as adopt/unadopted.cypher reads them, with their id and
// the digest of what their embedding was made from: adopting again re-embeds those that changed.
MATCH (n:{{dataset}}:{{label}})
WHERE n.{{id}} >= $lo AND n.{{id}} < $hi
RETURN collect({key: elementId(n), id: n.{{id}}, digest: n.{{digest}}, user_id: n[$id], name: n[$name],
                text: CASE WHEN $text IS NULL THEN NULL ELSE n[$text] END,
                embedding: CASE WHEN $embedding IS NULL THEN NULL ELSE n[$embedding] END,
                type: CASE WHEN $type IS NULL THEN NULL ELSE n[$type] END,
                labels: labels(n)}) AS nodes
