// One batch of relationships of one type, each row [source id, target id]. Each undirected
// (pair, relation) is stored once; retrieval traverses relationships in both directions.
UNWIND $rows AS row
MATCH (a:{{dataset}} {id: row[0]})
MATCH (b:{{dataset}} {id: row[1]})
CREATE (a)-[:{{rel_type}}]->(b)
RETURN count(*) AS written
