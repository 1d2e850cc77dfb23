// One batch of relationships of one type, each row [source key, target key]: internal node ids
// from ingest/node_keys (the label check keeps a batch inside its dataset). Each undirected
// (pair, relation) is stored once; retrieval traverses relationships in both directions.
// The caller compares written with the batch size: a row whose node is gone matches nothing.
UNWIND $rows AS row
MATCH (a:{{dataset}}) WHERE id(a) = row[0]
MATCH (b:{{dataset}}) WHERE id(b) = row[1]
CREATE (a)-[:{{rel_type}}]->(b)
RETURN count(*) AS written
