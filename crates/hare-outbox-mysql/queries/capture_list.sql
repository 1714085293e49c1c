-- The capture triggers of one database with their text (which holds the install record).
-- ? the database.
SELECT CAST(trigger_name AS CHAR(64)) AS name, CAST(action_statement AS CHAR) AS body
FROM information_schema.triggers
WHERE trigger_schema = ? AND trigger_name LIKE 'hare\_capture\_%'
ORDER BY trigger_name
