// The record of one ingested dataset (counts, model, dimension, progress), or nothing.
MATCH (m:SeederDataset {name: $name})
RETURN m {.*} AS meta
