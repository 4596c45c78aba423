/*
 * tpch.h — TPC-H LINEITEM rows as package tpch writes them to the device,
 * and the parameter header the tpch_* functions read before them.
 * functions/README.md has the byte layouts; tpch/format.go and
 * tpch/partial.go mirror them.
 *
 * Input of every tpch_* compute call (a λ read prepends the parameters to
 * the rows it reads):
 *
 *   offset  size
 *   0       32        parameter header (below)
 *   32      64 × n    n LINEITEM rows
 *
 * Row (64 bytes, little-endian):
 *
 *   offset size field
 *   0      8    l_orderkey       s64
 *   8      8    l_extendedprice  s64, cents
 *   16     4    l_partkey        s32
 *   20     4    l_suppkey        s32
 *   24     4    l_shipdate       s32, days since 1970-01-01
 *   28     4    l_commitdate     s32
 *   32     4    l_receiptdate    s32
 *   36     4    l_quantity       s32, whole units
 *   40     1    l_discount       u8, hundredths
 *   41     1    l_tax            u8, hundredths
 *   42     1    l_returnflag     'A', 'N', 'R'
 *   43     1    l_linestatus     'F', 'O'
 *   44     1    l_shipinstruct   code 0..3
 *   45     1    l_shipmode       code 0..6
 *   46     1    l_linenumber     1..7
 *   47     17   reserved, zero
 *
 * Parameter header (32 bytes): every function keeps the rows whose date
 * column (l_shipdate; Q12: l_receiptdate) is in [date_lo, date_hi).
 *
 *   offset size field
 *   0      4    magic "TPCH" (0x48435054)
 *   4      4    query: 1, 6, 12 or 14
 *   8      4    date_lo, s32, inclusive
 *   12     4    date_hi, s32, exclusive
 *   16     1    disc_lo, u8, inclusive (Q6)
 *   17     1    disc_hi, u8, inclusive (Q6)
 *   18     1    mode_a (Q12)
 *   19     1    mode_b (Q12)
 *   20     4    qty_hi, s32, exclusive (Q6)
 *   24     8    reserved, zero (ignored)
 *
 * Arithmetic on row values is done in u64, wrapping: the functions' outputs
 * are defined mod 2^64 for any bytes, and both targets are two's
 * complement, so the native Go references match them bit for bit.
 */
#ifndef NEARSTORE_TPCH_H
#define NEARSTORE_TPCH_H

#include "nearstore.h"

#define TPCH_ROW_SIZE    64
#define TPCH_PARAMS_SIZE 32
#define TPCH_MAGIC       0x48435054U

#define TPCH_ORDERKEY      0
#define TPCH_EXTENDEDPRICE 8
#define TPCH_PARTKEY       16
#define TPCH_SUPPKEY       20
#define TPCH_SHIPDATE      24
#define TPCH_COMMITDATE    28
#define TPCH_RECEIPTDATE   32
#define TPCH_QUANTITY      36
#define TPCH_DISCOUNT      40
#define TPCH_TAX           41
#define TPCH_RETURNFLAG    42
#define TPCH_LINESTATUS    43
#define TPCH_SHIPINSTRUCT  44
#define TPCH_SHIPMODE      45
#define TPCH_LINENUMBER    46

#define TPCH_P_QUERY   4
#define TPCH_P_DATE_LO 8
#define TPCH_P_DATE_HI 12
#define TPCH_P_DISC_LO 16
#define TPCH_P_DISC_HI 17
#define TPCH_P_MODE_A  18
#define TPCH_P_MODE_B  19
#define TPCH_P_QTY_HI  20

/* Q12's and Q14's output records: two u64s. */
#define TPCH_RECORD_SIZE 16

/*
 * tpch_rows checks the parameter header for query q and returns the number
 * of rows after it, or -1 (NS_EINVAL for the caller) if the input is short,
 * is not a whole number of rows, or has another magic or query.
 */
NS_INLINE s32 tpch_rows(const u8 *in, u32 in_len, u32 q)
{
	if (in_len < TPCH_PARAMS_SIZE || (in_len - TPCH_PARAMS_SIZE) % TPCH_ROW_SIZE != 0)
		return -1;
	if (ns_load32(in) != TPCH_MAGIC || ns_load32(in + TPCH_P_QUERY) != q)
		return -1;
	return (s32)((in_len - TPCH_PARAMS_SIZE) / TPCH_ROW_SIZE);
}

NS_INLINE s32 tpch_s32(const u8 *p) { return (s32)ns_load32(p); }

#endif
