// Store a dataset's learned relation prior (seeder_dgl/retrieval/relation_prior.py) in its record,
// as JSON, so every machine that queries the dataset scores K-hop relations the same way.
MATCH (m:SeederDataset {name: $name})
SET m.relation_prior = $prior, m.relation_prior_fitted_at = datetime()
RETURN m.name AS name
