-- Records one applied version right after its DDL (MySQL commits DDL on its own). Values are
-- rendered as literals (the text `schema` prints must run without parameters); run again, it
-- adds nothing.
INSERT INTO {migrations} (table_name, version, name, checksum)
VALUES ({table_name}, {version}, {name}, {checksum})
ON DUPLICATE KEY UPDATE version = version;
