package tpch

import (
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

// RowSize is the size of a LINEITEM row on the device. A power of two, so
// that rows never straddle a 512-byte or 4 KiB block and a λ read of any
// block-aligned range holds whole rows.
const RowSize = 64

// Byte offsets of the LINEITEM columns in a row. All integers are
// little-endian; the table in functions/README.md is the same layout, and
// functions/include/tpch.h spells it for the C functions.
//
//	offset size field
//	     0    8 l_orderkey      s64
//	     8    8 l_extendedprice s64, cents
//	    16    4 l_partkey       s32
//	    20    4 l_suppkey       s32
//	    24    4 l_shipdate      s32, days since 1970-01-01
//	    28    4 l_commitdate    s32, days since 1970-01-01
//	    32    4 l_receiptdate   s32, days since 1970-01-01
//	    36    4 l_quantity      s32, whole units (the spec's are 1..50)
//	    40    1 l_discount      u8, hundredths (0..10)
//	    41    1 l_tax           u8, hundredths (0..8)
//	    42    1 l_returnflag    ASCII 'A', 'N' or 'R'
//	    43    1 l_linestatus    ASCII 'F' or 'O'
//	    44    1 l_shipinstruct  ShipInstruct code (0..3)
//	    45    1 l_shipmode      ShipMode code (0..6)
//	    46    1 l_linenumber    u8 (1..7)
//	    47   17 reserved, zero (l_comment is not generated)
const (
	OffOrderKey      = 0
	OffExtendedPrice = 8
	OffPartKey       = 16
	OffSuppKey       = 20
	OffShipDate      = 24
	OffCommitDate    = 28
	OffReceiptDate   = 32
	OffQuantity      = 36
	OffDiscount      = 40
	OffTax           = 41
	OffReturnFlag    = 42
	OffLineStatus    = 43
	OffShipInstruct  = 44
	OffShipMode      = 45
	OffLineNumber    = 46
	offReserved      = 47
)

// Lineitem is one LINEITEM row: the columns of the spec's table that Q1,
// Q6, Q12 and Q14 use, and the keys. Decimal columns are exact integers:
// ExtendedPrice in cents, Discount and Tax in hundredths, Quantity in
// whole units (the spec generates only whole quantities).
type Lineitem struct {
	OrderKey      int64
	PartKey       int32
	SuppKey       int32
	LineNumber    uint8
	Quantity      int32
	ExtendedPrice int64
	Discount      uint8
	Tax           uint8
	ReturnFlag    byte
	LineStatus    byte
	ShipDate      Date
	CommitDate    Date
	ReceiptDate   Date
	ShipInstruct  ShipInstruct
	ShipMode      ShipMode
}

// Put writes l's row into b[:RowSize], reserved bytes included.
func (l *Lineitem) Put(b []byte) {
	b = b[:RowSize]
	le.PutUint64(b[OffOrderKey:], uint64(l.OrderKey))
	le.PutUint64(b[OffExtendedPrice:], uint64(l.ExtendedPrice))
	le.PutUint32(b[OffPartKey:], uint32(l.PartKey))
	le.PutUint32(b[OffSuppKey:], uint32(l.SuppKey))
	le.PutUint32(b[OffShipDate:], uint32(l.ShipDate))
	le.PutUint32(b[OffCommitDate:], uint32(l.CommitDate))
	le.PutUint32(b[OffReceiptDate:], uint32(l.ReceiptDate))
	le.PutUint32(b[OffQuantity:], uint32(l.Quantity))
	b[OffDiscount] = l.Discount
	b[OffTax] = l.Tax
	b[OffReturnFlag] = l.ReturnFlag
	b[OffLineStatus] = l.LineStatus
	b[OffShipInstruct] = byte(l.ShipInstruct)
	b[OffShipMode] = byte(l.ShipMode)
	b[OffLineNumber] = l.LineNumber
	clear(b[offReserved:])
}

// AppendBinary appends l's row.
func (l *Lineitem) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, make([]byte, RowSize)...)
	l.Put(b[len(b)-RowSize:])
	return b, nil
}

// ParseLineitem decodes the row in b[:RowSize]. It does not check the
// values: any 64 bytes decode.
func ParseLineitem(b []byte) Lineitem {
	b = b[:RowSize]
	return Lineitem{
		OrderKey:      int64(le.Uint64(b[OffOrderKey:])),
		ExtendedPrice: int64(le.Uint64(b[OffExtendedPrice:])),
		PartKey:       int32(le.Uint32(b[OffPartKey:])),
		SuppKey:       int32(le.Uint32(b[OffSuppKey:])),
		ShipDate:      Date(le.Uint32(b[OffShipDate:])),
		CommitDate:    Date(le.Uint32(b[OffCommitDate:])),
		ReceiptDate:   Date(le.Uint32(b[OffReceiptDate:])),
		Quantity:      int32(le.Uint32(b[OffQuantity:])),
		Discount:      b[OffDiscount],
		Tax:           b[OffTax],
		ReturnFlag:    b[OffReturnFlag],
		LineStatus:    b[OffLineStatus],
		ShipInstruct:  ShipInstruct(b[OffShipInstruct]),
		ShipMode:      ShipMode(b[OffShipMode]),
		LineNumber:    b[OffLineNumber],
	}
}

// ShipInstruct is l_shipinstruct as a code: the index in the spec's list
// (TPC-H 4.2.2.13, "Instructions").
type ShipInstruct uint8

// The ship instructions.
const (
	DeliverInPerson ShipInstruct = iota
	CollectCOD
	NoInstruction
	TakeBackReturn
	numShipInstructs
)

var shipInstructNames = [...]string{"DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"}

func (s ShipInstruct) String() string {
	if s < numShipInstructs {
		return shipInstructNames[s]
	}
	return fmt.Sprintf("ShipInstruct(%d)", uint8(s))
}

// ShipMode is l_shipmode as a code: the index in the spec's list (TPC-H
// 4.2.2.13, "Modes").
type ShipMode uint8

// The ship modes.
const (
	RegAir ShipMode = iota
	Air
	Rail
	Ship
	Truck
	Mail
	FOB
	numShipModes
)

var shipModeNames = [...]string{"REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"}

func (m ShipMode) String() string {
	if m < numShipModes {
		return shipModeNames[m]
	}
	return fmt.Sprintf("ShipMode(%d)", uint8(m))
}

// ParseShipMode returns the ship mode named s ("MAIL", "REG AIR", ...).
func ParseShipMode(s string) (ShipMode, error) {
	for i, n := range shipModeNames {
		if n == s {
			return ShipMode(i), nil
		}
	}
	return 0, fmt.Errorf("tpch: unknown ship mode %q", s)
}

// Priority is o_orderpriority as a code: the index in the spec's list
// (TPC-H 4.2.2.13, "Priorities").
type Priority uint8

// The order priorities.
const (
	Urgent Priority = iota
	High
	Medium
	NotSpecified
	Low
	numPriorities
)

var priorityNames = [...]string{"1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"}

func (p Priority) String() string {
	if p < numPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// PartType is p_type as a code: 25·s1 + 5·s2 + s3, the indexes of its
// three syllables in the spec's lists (TPC-H 4.2.2.13, "Types").
type PartType uint8

// NumPartTypes is the number of part types, 6 × 5 × 5.
const NumPartTypes = 150

var (
	typeSyllable1 = [...]string{"STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"}
	typeSyllable2 = [...]string{"ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"}
	typeSyllable3 = [...]string{"TIN", "NICKEL", "BRASS", "STEEL", "COPPER"}
)

// promoSyllable is the first syllable of the types Q14's `p_type like
// 'PROMO%'` selects.
const promoSyllable = 5

// IsPromo reports whether the type's name starts with "PROMO".
func (t PartType) IsPromo() bool { return t < NumPartTypes && t/25 == promoSyllable }

func (t PartType) String() string {
	if t >= NumPartTypes {
		return fmt.Sprintf("PartType(%d)", uint8(t))
	}
	return typeSyllable1[t/25] + " " + typeSyllable2[t/5%5] + " " + typeSyllable3[t%5]
}
