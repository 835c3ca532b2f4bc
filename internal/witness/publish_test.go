package witness

import (
	"strings"
	"testing"
)

func TestDeclaredRoundTrip(t *testing.T) {
	d := map[string]Gen{"node-b": 1 << 62, "node-a": 3}
	v, err := FormatDeclared(d)
	if err != nil {
		t.Fatal(err)
	}
	if v != "node-a=3,node-b=4611686018427387904" {
		t.Fatalf("FormatDeclared = %q", v)
	}
	back, err := ParseDeclared(v)
	if err != nil || len(back) != 2 || back["node-a"] != 3 || back["node-b"] != 1<<62 {
		t.Fatalf("ParseDeclared = %v, %v", back, err)
	}
	if empty, err := ParseDeclared(""); err != nil || len(empty) != 0 {
		t.Fatalf("ParseDeclared(\"\") = %v, %v", empty, err)
	}
}

func TestParseDeclaredRefusesAnythingElse(t *testing.T) {
	for _, v := range []string{
		"a", "a=", "=3", "a=0", "a=-1", "a=x", "a=3,", ",a=3", "a=3,a=4", "a=3;b=4",
		"a=18446744073709551616", strings.Repeat("x", 254) + "=1",
	} {
		if d, err := ParseDeclared(v); err == nil {
			t.Errorf("ParseDeclared(%q) = %v, want an error", v, d)
		}
	}
}

func TestFormatDeclaredRefusesBadNames(t *testing.T) {
	for _, node := range []string{"", "a=b", "a,b", strings.Repeat("x", 254)} {
		if _, err := FormatDeclared(map[string]Gen{node: 1}); err == nil {
			t.Errorf("FormatDeclared accepted node %q", node)
		}
	}
}

func TestParseGen(t *testing.T) {
	if g, err := ParseGen(""); err != nil || g != 0 {
		t.Fatalf("ParseGen(\"\") = %d, %v", g, err)
	}
	if g, err := ParseGen("42"); err != nil || g != 42 {
		t.Fatalf("ParseGen(42) = %d, %v", g, err)
	}
	if _, err := ParseGen("4x"); err == nil {
		t.Fatal("ParseGen(4x) accepted")
	}
}
