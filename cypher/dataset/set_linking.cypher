// Store a dataset's learned entity linker (seeder_dgl/retrieval/linking.py) and relation prior
// (seeder_dgl/retrieval/relation_prior.py; null: the stored one stays) in its record,
// as JSON, so every machine that queries the dataset links names and scores K-hop relations the
// same way.
MATCH (m:SeederDataset {name: $name})
SET m.entity_linker = $linker, m.relation_prior = coalesce($prior, m.relation_prior),
    m.linking_fitted_at = datetime()
RETURN m.name AS name
