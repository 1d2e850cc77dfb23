// The lease constraint goes with the last dataset: a database seeder-dgl no longer uses keeps nothing of it.
DROP CONSTRAINT seeder_lease_name IF EXISTS
