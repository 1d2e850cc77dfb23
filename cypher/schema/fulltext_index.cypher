// Full-text index on node names (entity linking / hybrid seeding). The 'standard' analyzer drops
// English stop words, so "the" or "of" in a question do not match every title that has them.
CREATE FULLTEXT INDEX {{dataset}}_name IF NOT EXISTS
FOR (n:{{dataset}}) ON EACH [n.{{name}}]
OPTIONS {indexConfig: {`fulltext.analyzer`: 'standard'}}
