// Full-text index on node names (entity linking / hybrid seeding).
CREATE FULLTEXT INDEX {{dataset}}_name IF NOT EXISTS
FOR (n:{{dataset}}) ON EACH [n.name]
