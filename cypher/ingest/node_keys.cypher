// Internal ids of the nodes of a dataset, read at the start of the relationship phase of each
// ingest run: matching a node by internal id costs a fraction of a seek in the id index (about
// twice the relationships per second at Prime scale). Every run reads them afresh and uses them
// within minutes, so ids reused after deletions (why id() is deprecated) do not come into it.
MATCH (n:{{dataset}})
RETURN collect(n.id) AS ids, collect(id(n)) AS keys
