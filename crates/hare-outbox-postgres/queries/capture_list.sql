-- Installed capture functions with their install record (the function's comment), and the state
-- of their trigger ('O' origin, 'D' disabled, …; NULL when the trigger is gone).
SELECT n.nspname AS schema,
       p.proname AS name,
       d.description AS record,
       (SELECT t.tgenabled::text FROM pg_trigger t WHERE t.tgfoid = p.oid LIMIT 1) AS trigger_state
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_description d
  ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass AND d.objsubid = 0
WHERE p.proname LIKE 'hare\_capture\_%'
