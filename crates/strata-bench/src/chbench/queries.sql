-- CH-benCHmark's 22 analytical queries (Cole et al., DBTest 2011): TPC-H's questions asked of
-- TPC-C's tables, with supplier, nation and region joined through stock (a stock row's
-- supplier is (s_w_id * s_i_id) mod 10000) and customers' nations taken from the first
-- character of c_state. Date bounds lie before the load (2026-01-01) or far after it, so the
-- queries read every row the transactions add. Ties in ORDER BY ... LIMIT are broken by more
-- columns, so every system returns the same rows. The dialect is what DataFusion, PostgreSQL
-- and DuckDB all accept. Tables are listed so that each joins one before it: DataFusion keeps
-- the FROM order, and a table joined with none before it is a cross join. Each query starts at
-- a `-- Qn` line.

-- Q1: order lines delivered, per line number
SELECT ol_number,
       sum(ol_quantity) AS sum_qty,
       sum(ol_amount) AS sum_amount,
       avg(ol_quantity) AS avg_qty,
       avg(ol_amount) AS avg_amount,
       count(*) AS count_order
FROM order_line
WHERE ol_delivery_d > TIMESTAMP '2025-01-01 00:00:00'
GROUP BY ol_number
ORDER BY ol_number;

-- Q2: the European suppliers holding the least stock of each item
SELECT su_suppkey, su_name, n_name, i_id, i_name, su_address, su_phone, su_comment
FROM item, supplier, stock, nation, region,
     (SELECT s_i_id AS m_i_id, min(s_quantity) AS m_s_quantity
      FROM stock, supplier, nation, region
      WHERE (s_w_id * s_i_id) % 10000 = su_suppkey
        AND su_nationkey = n_nationkey
        AND n_regionkey = r_regionkey
        AND r_name LIKE 'EUROP%'
      GROUP BY s_i_id) m
WHERE i_id = s_i_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND su_nationkey = n_nationkey
  AND n_regionkey = r_regionkey
  AND i_data LIKE '%b'
  AND r_name LIKE 'EUROP%'
  AND i_id = m_i_id
  AND s_quantity = m_s_quantity
ORDER BY n_name, su_name, i_id;

-- Q3: revenue of undelivered orders of customers in states starting with A
SELECT ol_o_id, ol_w_id, ol_d_id, sum(ol_amount) AS revenue, o_entry_d
FROM customer, new_order, orders, order_line
WHERE c_state LIKE 'A%'
  AND c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND no_w_id = o_w_id AND no_d_id = o_d_id AND no_o_id = o_id
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND o_entry_d > TIMESTAMP '2025-01-01 00:00:00'
GROUP BY ol_o_id, ol_w_id, ol_d_id, o_entry_d
ORDER BY revenue DESC, o_entry_d, ol_w_id, ol_d_id, ol_o_id;

-- Q4: orders with a line delivered on or after entry, per line count
SELECT o_ol_cnt, count(*) AS order_count
FROM orders
WHERE o_entry_d >= TIMESTAMP '2025-01-01 00:00:00'
  AND o_entry_d < TIMESTAMP '2100-01-01 00:00:00'
  AND EXISTS (SELECT * FROM order_line
              WHERE o_id = ol_o_id AND o_w_id = ol_w_id AND o_d_id = ol_d_id
                AND ol_delivery_d >= o_entry_d)
GROUP BY o_ol_cnt
ORDER BY o_ol_cnt;

-- Q5: revenue in Europe from customers and suppliers of one nation
SELECT n_name, sum(ol_amount) AS revenue
FROM customer, orders, order_line, stock, supplier, nation, region
WHERE c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND ol_o_id = o_id AND ol_w_id = o_w_id AND ol_d_id = o_d_id
  AND ol_w_id = s_w_id AND ol_i_id = s_i_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND ascii(substr(c_state, 1, 1)) = su_nationkey
  AND su_nationkey = n_nationkey
  AND n_regionkey = r_regionkey
  AND r_name = 'EUROPE'
  AND o_entry_d >= TIMESTAMP '2025-01-01 00:00:00'
GROUP BY n_name
ORDER BY revenue DESC, n_name;

-- Q6: revenue of delivered lines in a quantity range
SELECT sum(ol_amount) AS revenue
FROM order_line
WHERE ol_delivery_d >= TIMESTAMP '1999-01-01 00:00:00'
  AND ol_delivery_d < TIMESTAMP '2100-01-01 00:00:00'
  AND ol_quantity BETWEEN 1 AND 100000;

-- Q7: trade between Germany and Cambodia, per year
SELECT su_nationkey AS supp_nation,
       substr(c_state, 1, 1) AS cust_nation,
       extract(year FROM o_entry_d) AS l_year,
       sum(ol_amount) AS revenue
FROM supplier, stock, order_line, orders, customer, nation n1, nation n2
WHERE ol_supply_w_id = s_w_id AND ol_i_id = s_i_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND su_nationkey = n1.n_nationkey
  AND ascii(substr(c_state, 1, 1)) = n2.n_nationkey
  AND ((n1.n_name = 'GERMANY' AND n2.n_name = 'CAMBODIA')
       OR (n1.n_name = 'CAMBODIA' AND n2.n_name = 'GERMANY'))
  AND ol_delivery_d BETWEEN TIMESTAMP '2007-01-02 00:00:00' AND TIMESTAMP '2100-01-02 00:00:00'
GROUP BY su_nationkey, substr(c_state, 1, 1), extract(year FROM o_entry_d)
ORDER BY su_nationkey, cust_nation, l_year;

-- Q8: Germany's share of European customers' orders of some items, per year
SELECT extract(year FROM o_entry_d) AS l_year,
       sum(CASE WHEN n2.n_name = 'GERMANY' THEN ol_amount ELSE 0 END) / NULLIF(sum(ol_amount), 0) AS mkt_share
FROM item, supplier, stock, order_line, orders, customer, nation n1, nation n2, region
WHERE i_id = s_i_id AND ol_i_id = s_i_id AND ol_supply_w_id = s_w_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND n1.n_nationkey = ascii(substr(c_state, 1, 1))
  AND n1.n_regionkey = r_regionkey
  AND ol_i_id < 1000
  AND r_name = 'EUROPE'
  AND su_nationkey = n2.n_nationkey
  AND o_entry_d BETWEEN TIMESTAMP '2007-01-02 00:00:00' AND TIMESTAMP '2100-01-02 00:00:00'
  AND i_data LIKE '%b'
  AND i_id = ol_i_id
GROUP BY extract(year FROM o_entry_d)
ORDER BY l_year;

-- Q9: revenue of items whose data ends in BB, per supplier nation and year
SELECT n_name, extract(year FROM o_entry_d) AS l_year, sum(ol_amount) AS sum_profit
FROM item, stock, supplier, order_line, orders, nation
WHERE ol_i_id = s_i_id AND ol_supply_w_id = s_w_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND ol_i_id = i_id
  AND su_nationkey = n_nationkey
  AND i_data LIKE '%BB'
GROUP BY n_name, extract(year FROM o_entry_d)
ORDER BY n_name, l_year DESC;

-- Q10: the customers with the most revenue from delivered orders
SELECT c_id, c_last, sum(ol_amount) AS revenue, c_city, c_phone, n_name
FROM customer, orders, order_line, nation
WHERE c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND o_entry_d >= TIMESTAMP '2025-01-01 00:00:00'
  AND o_entry_d <= ol_delivery_d
  AND n_nationkey = ascii(substr(c_state, 1, 1))
GROUP BY c_id, c_last, c_city, c_phone, n_name
ORDER BY revenue DESC, c_id, c_last, c_city, c_phone, n_name
LIMIT 20;

-- Q11: the most ordered stock of German suppliers
SELECT s_i_id, sum(s_order_cnt) AS ordercount
FROM stock, supplier, nation
WHERE (s_w_id * s_i_id) % 10000 = su_suppkey
  AND su_nationkey = n_nationkey
  AND n_name = 'GERMANY'
GROUP BY s_i_id
HAVING sum(s_order_cnt) > (SELECT sum(s_order_cnt) * 0.005
                           FROM stock, supplier, nation
                           WHERE (s_w_id * s_i_id) % 10000 = su_suppkey
                             AND su_nationkey = n_nationkey
                             AND n_name = 'GERMANY')
ORDER BY ordercount DESC, s_i_id;

-- Q12: delivered lines by carrier class, per line count
SELECT o_ol_cnt,
       sum(CASE WHEN o_carrier_id = 1 OR o_carrier_id = 2 THEN 1 ELSE 0 END) AS high_line_count,
       sum(CASE WHEN o_carrier_id <> 1 AND o_carrier_id <> 2 THEN 1 ELSE 0 END) AS low_line_count
FROM orders, order_line
WHERE ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
  AND o_entry_d <= ol_delivery_d
  AND ol_delivery_d < TIMESTAMP '2100-01-01 00:00:00'
GROUP BY o_ol_cnt
ORDER BY o_ol_cnt;

-- Q13: customers by how many orders carriers above 8 delivered
SELECT c_count, count(*) AS custdist
FROM (SELECT c_id, count(o_id) AS c_count
      FROM customer LEFT OUTER JOIN orders
           ON c_w_id = o_w_id AND c_d_id = o_d_id AND c_id = o_c_id AND o_carrier_id > 8
      GROUP BY c_id) AS c_orders
GROUP BY c_count
ORDER BY custdist DESC, c_count DESC;

-- Q14: the share of delivered revenue from promoted items
SELECT 100.00 * sum(CASE WHEN i_data LIKE 'PR%' THEN ol_amount ELSE 0 END) / (1 + sum(ol_amount)) AS promo_revenue
FROM order_line, item
WHERE ol_i_id = i_id
  AND ol_delivery_d >= TIMESTAMP '2007-01-02 00:00:00'
  AND ol_delivery_d < TIMESTAMP '2100-01-02 00:00:00';

-- Q15: the supplier with the most delivered revenue
WITH revenue AS (
    SELECT (s_w_id * s_i_id) % 10000 AS supplier_no, sum(ol_amount) AS total_revenue
    FROM order_line, stock
    WHERE ol_i_id = s_i_id AND ol_supply_w_id = s_w_id
      AND ol_delivery_d >= TIMESTAMP '2007-01-02 00:00:00'
    GROUP BY (s_w_id * s_i_id) % 10000)
SELECT su_suppkey, su_name, su_address, su_phone, total_revenue
FROM supplier, revenue
WHERE su_suppkey = supplier_no
  AND total_revenue = (SELECT max(total_revenue) FROM revenue)
ORDER BY su_suppkey;

-- Q16: suppliers without complaints per item name, brand and price
SELECT i_name, substr(i_data, 1, 3) AS brand, i_price,
       count(DISTINCT (s_w_id * s_i_id) % 10000) AS supplier_cnt
FROM stock, item
WHERE i_id = s_i_id
  AND i_data NOT LIKE 'zz%'
  AND (s_w_id * s_i_id) % 10000 NOT IN (SELECT su_suppkey FROM supplier WHERE su_comment LIKE '%bad%')
GROUP BY i_name, substr(i_data, 1, 3), i_price
ORDER BY supplier_cnt DESC, i_name, brand, i_price
LIMIT 100;

-- Q17: yearly revenue lost if small lines of some items were not taken
SELECT sum(ol_amount) / 2.0 AS avg_yearly
FROM order_line,
     (SELECT i_id, avg(ol_quantity) AS a
      FROM item, order_line
      WHERE i_data LIKE '%b' AND ol_i_id = i_id
      GROUP BY i_id) t
WHERE ol_i_id = t.i_id
  AND ol_quantity < t.a;

-- Q18: large orders and their customers
SELECT c_last, c_id, o_id, o_entry_d, o_ol_cnt, sum(ol_amount) AS amount_sum
FROM customer, orders, order_line
WHERE c_id = o_c_id AND c_w_id = o_w_id AND c_d_id = o_d_id
  AND ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
GROUP BY o_id, o_w_id, o_d_id, c_id, c_last, o_entry_d, o_ol_cnt
HAVING sum(ol_amount) > 200
ORDER BY amount_sum DESC, o_entry_d, o_w_id, o_d_id, o_id
LIMIT 100;

-- Q19: revenue of three kinds of items in three sets of warehouses
SELECT sum(ol_amount) AS revenue
FROM order_line, item
WHERE (ol_i_id = i_id AND i_data LIKE '%a' AND ol_quantity >= 1 AND ol_quantity <= 10
       AND i_price BETWEEN 1 AND 400000 AND ol_w_id IN (1, 2, 3))
   OR (ol_i_id = i_id AND i_data LIKE '%b' AND ol_quantity >= 1 AND ol_quantity <= 10
       AND i_price BETWEEN 1 AND 400000 AND ol_w_id IN (1, 2, 4))
   OR (ol_i_id = i_id AND i_data LIKE '%c' AND ol_quantity >= 1 AND ol_quantity <= 10
       AND i_price BETWEEN 1 AND 400000 AND ol_w_id IN (1, 5, 3));

-- Q20: German suppliers with plenty of stock of some items
SELECT su_name, su_address
FROM supplier, nation
WHERE su_suppkey IN (SELECT (s_i_id * s_w_id) % 10000
                     FROM stock, order_line
                     WHERE s_i_id IN (SELECT i_id FROM item WHERE i_data LIKE 'co%')
                       AND ol_i_id = s_i_id
                       AND ol_delivery_d > TIMESTAMP '2010-05-23 12:00:00'
                     GROUP BY s_i_id, s_w_id, s_quantity
                     HAVING 2 * s_quantity > sum(ol_quantity))
  AND su_nationkey = n_nationkey
  AND n_name = 'GERMANY'
ORDER BY su_name;

-- Q21: German suppliers whose line was the last of an order delivered after entry
SELECT su_name, count(*) AS numwait
FROM order_line l1, orders, stock, supplier, nation
WHERE l1.ol_o_id = o_id AND l1.ol_w_id = o_w_id AND l1.ol_d_id = o_d_id
  AND l1.ol_w_id = s_w_id AND l1.ol_i_id = s_i_id
  AND (s_w_id * s_i_id) % 10000 = su_suppkey
  AND l1.ol_delivery_d > o_entry_d
  AND NOT EXISTS (SELECT * FROM order_line l2
                  WHERE l2.ol_o_id = l1.ol_o_id AND l2.ol_w_id = l1.ol_w_id AND l2.ol_d_id = l1.ol_d_id
                    AND l2.ol_delivery_d > l1.ol_delivery_d)
  AND su_nationkey = n_nationkey
  AND n_name = 'GERMANY'
GROUP BY su_name
ORDER BY numwait DESC, su_name
LIMIT 100;

-- Q22: customers with balances above average and no recent order, per state initial
SELECT substr(c_state, 1, 1) AS country, count(*) AS numcust, sum(c_balance) AS totacctbal
FROM customer
WHERE substr(c_phone, 1, 1) IN ('1', '2', '3', '4', '5', '6', '7')
  AND c_balance > (SELECT avg(c_balance) FROM customer
                   WHERE c_balance > 0.00 AND substr(c_phone, 1, 1) IN ('1', '2', '3', '4', '5', '6', '7'))
  AND NOT EXISTS (SELECT * FROM orders
                  WHERE o_c_id = c_id AND o_w_id = c_w_id AND o_d_id = c_d_id
                    AND o_entry_d > TIMESTAMP '2013-12-01 00:00:00')
GROUP BY substr(c_state, 1, 1)
ORDER BY substr(c_state, 1, 1);
