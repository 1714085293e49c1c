-- The relay's topics for the row aliased {a}: five parameters, every topic? (0/1), included
-- names, included prefixes, excluded names, excluded prefixes (JSON arrays of strings). Prefixes
-- match literally and case-sensitively (byte comparison, never LIKE).
(? OR {a}.topic IN (SELECT j.v FROM JSON_TABLE(?, '$[*]' COLUMNS (v VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j)
      OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (v VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS p
                 WHERE LEFT({a}.topic, CHAR_LENGTH(p.v)) = p.v))
  AND NOT ({a}.topic IN (SELECT j.v FROM JSON_TABLE(?, '$[*]' COLUMNS (v VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j)
      OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (v VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS p
                 WHERE LEFT({a}.topic, CHAR_LENGTH(p.v)) = p.v))
