// Add or change nodes of one type: MERGE by seeder-dgl's id (upsert.py resolves the user's ids to it),
// so a repeated upsert changes nothing more. key: the id the user's node table gives (null for none).
UNWIND $rows AS row
MERGE (n:{{dataset}} {id: row.id})
ON CREATE SET n.created_by = 'upsert'
// The sketch changes with the embedding, always in the same statement: K-hop trusts its bounds.
SET n:{{node_type}}, n.key = row.key, n.name = row.name, n.text = row.text, n.type = $type_name,
    n.sketch = row.sketch, n.sketch_error = row.sketch_error
WITH n, row
CALL db.create.setNodeVectorProperty(n, 'embedding', row.embedding)
RETURN count(*) AS written
