package crontab

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
)

// create asks the API server to create a CronTab without keeping it.
func create(t *testing.T, s stablev1.CronTabSpec) error {
	ct := &stablev1.CronTab{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "valid-"}, Spec: s}
	return k8s.Create(t.Context(), ct, client.DryRunAll)
}

func TestCronSpecValidation(t *testing.T) {
	valid := []string{
		"* * * * */5", // the Kubernetes docs' example
		"*/5 * * * *",
		"0 0 * * *",
		"30 2 * * MON-FRI",
		"0 0 1 jan,Jul *",
		"59 23 31 12 6",
		"00 09 01 01 0",
		"0-59/15 */2 ? * ?",
		"5/15 1,2,3-5 1-31/2 1-12 sun-sat",
		"0 0 * jan-6 mon-FRI,5-sat",
		"0  0 * * *", // fields may be separated by several spaces
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
	}
	for _, s := range valid {
		t.Run(s, func(t *testing.T) {
			NewWithT(t).Expect(create(t, spec(s, "app:1.0", 1))).To(Succeed())
		})
	}

	invalid := []struct{ cron, message string }{
		{"", "should be at least 1 chars long"},
		{"* * *", "cronSpec must be a cron expression of 5 fields"},
		{"not a cron", "cronSpec must be a cron expression of 5 fields"},
		{"* * * * * *", "cronSpec must be a cron expression of 5 fields"},
		{"@every 5m", "cronSpec must be a cron expression of 5 fields"},
		{"@reboot", "cronSpec must be a cron expression of 5 fields"},
		{" * * * * *", "cronSpec must be a cron expression of 5 fields"},
		{"TZ=UTC * * * * *", "cronSpec must be a cron expression of 5 fields"},
		{"61 * * * *", "the minute field (1st) of cronSpec must be"},
		{"*/0 * * * *", "the minute field (1st) of cronSpec must be"},
		{"1,,2 * * * *", "the minute field (1st) of cronSpec must be"},
		{"0 24 * * *", "the hour field (2nd) of cronSpec must be"},
		{"0 0 0 * *", "the day-of-month field (3rd) of cronSpec must be"},
		{"0 0 32 * *", "the day-of-month field (3rd) of cronSpec must be"},
		{"0 0 * 13 *", "the month field (4th) of cronSpec must be"},
		{"0 0 * january *", "the month field (4th) of cronSpec must be"},
		{"0 0 * * 7", "the day-of-week field (5th) of cronSpec must be"},
		{"0 0 * * L", "the day-of-week field (5th) of cronSpec must be"},
		{"30-10 * * * *", "ranges in cronSpec must go from low to high"},
		{"0 0 * 6-1/2 *", "ranges in cronSpec must go from low to high"},
		{"0 0 * * FRI-MON", "ranges in cronSpec must go from low to high"},
		{"0 0 * DEC-jan *", "ranges in cronSpec must go from low to high"},
		{"0 0 * 5-Feb *", "ranges in cronSpec must go from low to high"},
	}
	for _, tc := range invalid {
		t.Run(tc.cron, func(t *testing.T) {
			err := create(t, spec(tc.cron, "app:1.0", 1))
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.message)))
		})
	}
}

func TestSpecValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		spec    stablev1.CronTabSpec
		message string
	}{
		"no image":        {stablev1.CronTabSpec{CronSpec: "@daily"}, "spec.image"},
		"spaced image":    {spec("@daily", "app 1.0", 1), "image must not contain whitespace"},
		"negative":        {spec("@daily", "app:1.0", -1), "spec.replicas"},
		"local time zone": {stablev1.CronTabSpec{CronSpec: "@daily", Image: "app:1.0", TimeZone: "Local"}, "timeZone must be a name from the tz database"},
		"policy":          {stablev1.CronTabSpec{CronSpec: "@daily", Image: "app:1.0", ConcurrencyPolicy: "Sometimes"}, "spec.concurrencyPolicy"},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(create(t, tc.spec)).To(MatchError(ContainSubstring(tc.message)))
		})
	}
}
