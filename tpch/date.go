package tpch

import (
	"fmt"
	"time"
)

// Date is a calendar date as the number of days since 1970-01-01, the
// form dates take in LINEITEM rows and in the functions' parameters: a
// plain int32, so that comparisons and the spec's day arithmetic are
// integer operations in C, eBPF and Go alike.
type Date int32

// secondsPerDay converts between Date and Unix time.
const secondsPerDay = 24 * 60 * 60

// MakeDate returns the Date of a proleptic Gregorian calendar day.
// Out-of-range months and days normalize as time.Date's do.
func MakeDate(year int, month time.Month, day int) Date {
	return Date(time.Date(year, month, day, 0, 0, 0, 0, time.UTC).Unix() / secondsPerDay)
}

// ParseDate parses a date in the form "1995-06-17".
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, fmt.Errorf("tpch: date %q: %w", s, err)
	}
	return Date(t.Unix() / secondsPerDay), nil
}

// Time returns d as midnight UTC.
func (d Date) Time() time.Time { return time.Unix(int64(d)*secondsPerDay, 0).UTC() }

// String formats d as "1995-06-17".
func (d Date) String() string { return d.Time().Format(time.DateOnly) }

// AddMonths returns d plus n calendar months, as SQL's `+ interval 'n'
// month` on the first of a month (the only dates the queries add months
// to). A day past the end of the target month normalizes into the next
// month, as time.AddDate does.
func (d Date) AddMonths(n int) Date {
	return Date(d.Time().AddDate(0, n, 0).Unix() / secondsPerDay)
}

// The spec's calendar (TPC-H 4.2.3): orders are placed from StartDate to
// EndDate minus 151 days, and CurrentDate decides which lines are
// returned or still open. Constants, so they are days since 1970 spelled
// out; a test checks them against MakeDate.
const (
	StartDate   Date = 8035  // 1992-01-01
	CurrentDate Date = 9298  // 1995-06-17
	EndDate     Date = 10591 // 1998-12-31
)
