// seeder-dgl's ids of the nodes the given source ids name (absent keys are simply missing). One
// scan of the label with a set lookup per node: no index on key to keep up at every ingest.
MATCH (n:{{dataset}})
WHERE n.key IN $keys
RETURN collect(n.key) AS keys, collect(n.id) AS ids
