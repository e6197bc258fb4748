package postgres

import (
	"fmt"
	"strings"
)

// params returns "$from, …, $to".
func params(from, to int) string {
	ps := make([]string, 0, to-from+1)
	for i := from; i <= to; i++ {
		ps = append(ps, fmt.Sprintf("$%d", i))
	}
	return strings.Join(ps, ", ")
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
