// Every dataset this database holds, for `seeder-dgl status` and error messages.
MATCH (m:SeederDataset)
RETURN m.name AS name, m.status AS status, m.num_nodes AS num_nodes, m.num_relationships AS num_relationships,
       m.model AS model, m.dimension AS dimension, m.label AS label, m.retrieval AS retrieval
ORDER BY name
