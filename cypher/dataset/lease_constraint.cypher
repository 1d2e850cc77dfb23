// One lease node per dataset name: MERGE on a unique property is safe between concurrent writers.
CREATE CONSTRAINT seeder_lease_name IF NOT EXISTS FOR (l:SeederLease) REQUIRE l.name IS UNIQUE
