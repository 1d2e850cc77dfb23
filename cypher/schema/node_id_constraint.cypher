// One node per dataset id. The constraint's index also serves every MATCH on (:Dataset {id}).
CREATE CONSTRAINT {{dataset}}_id IF NOT EXISTS
FOR (n:{{dataset}}) REQUIRE n.id IS UNIQUE
