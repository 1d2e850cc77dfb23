// The seeder-dgl procedures this server has (neo4j/procedures/): LiveGraph runs K-hop through
// them when it lists every one it calls, else through the Cypher statements in retrieval/.
SHOW PROCEDURES YIELD name
WHERE name STARTS WITH 'seeder.'
RETURN collect(name) AS names
