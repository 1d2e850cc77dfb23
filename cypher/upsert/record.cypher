// Keep the dataset record in step with live changes: relation and node type vocabularies, current
// counts, and a new sketch_version in the same transaction as the nodes' new sketches (procedures'
// SketchCache).
MATCH (m:SeederDataset {name: $name})
SET m.relation_names = $relation_names, m.relation_types = $relation_types,
    m.relation_embeddings = $relation_embeddings, m.node_type_names = $node_type_names,
    m.node_labels = $node_labels, m.updated_at = datetime(), m.sketch_version = randomUUID()
WITH m
CALL { MATCH (n:{{dataset}}) RETURN count(n) AS nodes }
CALL { MATCH (:{{dataset}})-[r]->(:{{dataset}}) RETURN count(r) AS relationships }
SET m.num_nodes = nodes, m.num_relationships = relationships
RETURN nodes, relationships
