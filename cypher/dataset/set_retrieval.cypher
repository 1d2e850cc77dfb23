// Store the retrieval settings chosen for a dataset (`seeder-dgl tune`) in its record, as JSON.
MATCH (m:SeederDataset {name: $name})
SET m.retrieval = $retrieval, m.retrieval_tuned_at = datetime()
RETURN m.name AS name
