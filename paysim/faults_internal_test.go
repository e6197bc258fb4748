package paysim

import (
	"testing"
	"time"
)

func TestParseFaultHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    requestFaults
		wantErr bool
	}{
		{in: "", want: requestFaults{}},
		{in: "drop-after-commit", want: requestFaults{kind: FaultDrop}},
		{in: "error", want: requestFaults{kind: FaultError}},
		{in: "timeout", want: requestFaults{kind: FaultTimeout}},
		{in: "decline", want: requestFaults{kind: FaultDecline}},
		{in: "latency=250ms", want: requestFaults{latency: 250 * time.Millisecond}},
		{in: " latency=1s , drop-after-commit ", want: requestFaults{kind: FaultDrop, latency: time.Second}},
		{in: "error, error", want: requestFaults{kind: FaultError}},
		{in: "error, timeout", wantErr: true},
		{in: "latency=-1s", wantErr: true},
		{in: "latency=10m", wantErr: true},
		{in: "latency=3m, latency=3m", wantErr: true},
		{in: "explode", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseFaultHeader(tt.in)
			if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
				t.Errorf("parseFaultHeader(%q) = %+v, %v; want %+v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
