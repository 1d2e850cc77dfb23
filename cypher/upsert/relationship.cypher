// Add relationships of one type unless the pair already has one (in either direction).
UNWIND $rows AS row
MATCH (a:{{dataset}} {id: row[0]})
MATCH (b:{{dataset}} {id: row[1]})
MERGE (a)-[:{{rel_type}}]-(b)
RETURN count(*) AS written
