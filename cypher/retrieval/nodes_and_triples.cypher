// What a retrieval returns about its nodes, in one round trip: node_descriptions.cypher's lists for
// the ids given (missing ids are simply absent) and triples.cypher's relationships among them.
UNWIND $ids AS id
MATCH (n:{{dataset}} {{{id}}: id})
WITH collect(n) AS nodes
WITH nodes, reduce(found = [], a IN nodes |
       found + [(a)-[r]->(b:{{dataset}}) WHERE b.{{id}} IN $ids AND ($types IS NULL OR type(r) IN $types) | [a, type(r), b]]
     ) AS edges
// Names and texts as in node_descriptions.cypher: text, '' for none, so the lists stay aligned.
RETURN [n IN nodes | n.{{id}}] AS ids, [n IN nodes | n.{{type}}] AS types,
       [n IN nodes | coalesce(toStringOrNull(n.{{name}}), '')] AS names,
       [n IN nodes | coalesce(toStringOrNull(n.{{text}}), toStringOrNull(n.{{name}}), '')] AS texts,
       [n IN nodes | coalesce(toStringOrNull(n.{{key}}), '')] AS keys,
       [e IN edges | e[0].{{id}}] AS sources, [e IN edges | coalesce(toStringOrNull(e[0].{{name}}), '')] AS source_names,
       [e IN edges | e[1]] AS relations, [e IN edges | e[2].{{id}}] AS targets,
       [e IN edges | coalesce(toStringOrNull(e[2].{{name}}), '')] AS target_names
