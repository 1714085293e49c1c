-- Locks ordering keys until the end of the transaction ({rows}: one `(UNHEX(SHA2(?, 256)))` per
-- key, in hash order so two writers of several keys cannot deadlock on each other).
INSERT INTO {key_locks} (lock_key) VALUES {rows}
ON DUPLICATE KEY UPDATE lock_key = lock_key
