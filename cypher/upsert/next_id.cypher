// The first seeder-dgl id after every node's: where the nodes an upsert adds are numbered from.
// The id constraint's index gives the largest id without reading the nodes.
MATCH (n:{{dataset}})
WHERE n.id IS NOT NULL
RETURN n.id AS last
ORDER BY last DESC
LIMIT 1
