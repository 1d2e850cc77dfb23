// One node per dataset id. The constraint's index also serves every MATCH on (:Dataset {id}):
// {{id}} is the dataset's own id property (graphstore/schema.py), so an adopted dataset's lookups
// go through its own constraint as an ingested one's do.
CREATE CONSTRAINT {{dataset}}_id IF NOT EXISTS
FOR (n:{{dataset}}) REQUIRE n.{{id}} IS UNIQUE
