// Whether the dataset keeps the ids its source gave its nodes (ingested from a node table: the
// property key): then an upsert names nodes by those ids, as the user's files do. Stops at the
// first such node; a dataset without keys is scanned once, as rarely as upserts run.
RETURN EXISTS { MATCH (n:{{dataset}}) WHERE n.key IS NOT NULL } AS keyed
