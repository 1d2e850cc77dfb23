// Drop a dataset's vector index (for --reset); nothing happens when it is not there.
DROP INDEX {{dataset}}_embedding IF EXISTS
