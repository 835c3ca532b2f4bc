package version

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		printed bool
		err     bool
	}{
		{args: []string{"--version"}, printed: true},
		{args: []string{"--version", "--other=x"}, printed: true},
		{args: []string{"--other=x"}},
		{args: []string{"--nope"}, err: true},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		other := fs.String("other", "", "")
		var out bytes.Buffer
		printed, err := Parse(fs, tc.args, &out)
		if (err != nil) != tc.err || printed != tc.printed {
			t.Fatalf("Parse(%q) = %v, %v; want printed %v, error %v", tc.args, printed, err, tc.printed, tc.err)
		}
		if got := strings.TrimSpace(out.String()); printed != (got != "") || printed && got != Get().String() {
			t.Fatalf("Parse(%q) printed %q", tc.args, got)
		}
		if !tc.err && strings.Contains(strings.Join(tc.args, " "), "--other=x") && *other != "x" {
			t.Fatalf("Parse(%q) left --other %q", tc.args, *other)
		}
	}
}
