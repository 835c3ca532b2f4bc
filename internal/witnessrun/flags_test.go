package witnessrun

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func parse(t *testing.T, env string, args ...string) (Config, error) {
	t.Helper()
	t.Setenv(AllowFromEnv, env)
	fs := flag.NewFlagSet("ip-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, SetAllowFromDefault(fs)
}

func TestAllowFromFlagAndItsDefault(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		args      []string
		want      []string
	}{
		{name: "neither: any source"},
		{name: "the ConfigMap's, by the environment", env: "192.0.2.0/24, 2001:db8::/32", want: []string{"192.0.2.0/24", "2001:db8::/32"}},
		{name: "the flag wins", env: "192.0.2.0/24", args: []string{"--witness-allow-from=198.51.100.0/24"}, want: []string{"198.51.100.0/24"}},
		{name: "an empty flag is any source", env: "192.0.2.0/24", args: []string{"--witness-allow-from="}},
	} {
		c, err := parse(t, tc.env, tc.args...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, p := range c.AllowFrom {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: allow from %v, want %v", tc.name, got, tc.want)
		}
		if !c.Guard {
			t.Errorf("%s: the guard is off by default", tc.name)
		}
	}
	for _, bad := range []string{"192.0.2.1/24", "nodes", "192.0.2.0"} {
		if _, err := parse(t, "", "--witness-allow-from="+bad); err == nil {
			t.Errorf("--witness-allow-from=%s accepted", bad)
		}
		if _, err := parse(t, bad); err == nil {
			t.Errorf("$%s=%s accepted", AllowFromEnv, bad)
		}
	}
}
