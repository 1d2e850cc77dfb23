// Full-text index on the words of node names (entity linking for names written with '_'). The
// 'standard' analyzer of {{dataset}}_name keeps 'Virginia_gubernatorial_election' as one term,
// which a question typed with spaces reaches only word for word; 'stop' splits names at every
// character that is not a letter (digits are not kept) and drops English stop words, so each
// word of such a name is a term of its own. The second property is never written: Neo4j allows
// one index per label and property list, and it makes this index's list differ from the name
// index's (both index exactly the nodes' names).
CREATE FULLTEXT INDEX {{dataset}}_words IF NOT EXISTS
FOR (n:{{dataset}}) ON EACH [n.{{name}}, n.{{dataset}}_words]
OPTIONS {indexConfig: {`fulltext.analyzer`: 'stop'}}
