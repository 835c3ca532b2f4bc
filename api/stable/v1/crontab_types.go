package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelCronTab is set on the CronJob, its Jobs and their pods; its value is
// the name of the CronTab they run for.
const LabelCronTab = "stable.example.com/crontab"

// ConditionReady is True when the CronTab's CronJob exists and matches the
// spec, so that Jobs start on schedule (unless spec.suspend is true).
const ConditionReady = "Ready"

// Reasons of the Ready condition.
const (
	// ReasonScheduled: the CronJob matches the spec and starts Jobs on
	// schedule.
	ReasonScheduled = "Scheduled"

	// ReasonSuspended: the CronJob matches the spec, which suspends it: no
	// new Jobs start until spec.suspend is false again.
	ReasonSuspended = "Suspended"

	// ReasonCronJobRejected: the API server refused the CronJob built from
	// the spec (for instance an unknown spec.timeZone, or a cronSpec the
	// CronJob parser refuses although it passed this API's checks); the
	// message quotes the API server. Fix the spec.
	ReasonCronJobRejected = "CronJobRejected"

	// ReasonCronJobExists: a CronJob with the CronTab's name exists in the
	// namespace and is not controlled by this CronTab, so kubext leaves it
	// alone. Delete or rename that CronJob, or rename the CronTab.
	ReasonCronJobExists = "CronJobExists"

	// ReasonApplyFailed: writing the CronJob failed for a reason that may
	// pass (the message says which); kubext retries.
	ReasonApplyFailed = "ApplyFailed"
)

// ConcurrencyPolicy says what happens when a run is due while the previous
// one still runs.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ConcurrencyPolicy string

const (
	// ConcurrencyAllow starts the new run alongside the running one.
	ConcurrencyAllow ConcurrencyPolicy = "Allow"
	// ConcurrencyForbid skips the new run.
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
	// ConcurrencyReplace stops the running one and starts the new run.
	ConcurrencyReplace ConcurrencyPolicy = "Replace"
)

// CronTabSpec is what to run and when.
type CronTabSpec struct {
	// cronSpec is when to run, in the syntax of a Kubernetes CronJob
	// schedule: five fields separated by spaces, minute (0-59), hour (0-23),
	// day-of-month (1-31), month (1-12 or JAN-DEC) and day-of-week (0-6 or
	// SUN-SAT, 0 is Sunday), each being * (any), a value, a range (1-5), a
	// list (1,3,5) or a step (*/15, 0-30/10); ? is accepted for * in the two
	// day fields. For example "*/5 * * * *" runs every five minutes and
	// "30 2 * * MON-FRI" at 02:30 on weekdays. The descriptors @yearly (or @annually),
	// @monthly, @weekly, @daily (or @midnight) and @hourly are accepted too.
	// Times are in spec.timeZone. The API server refuses anything else,
	// naming the field at fault. A date that never comes (e.g. "0 0 30 2 *",
	// 30 February) is accepted and never runs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^[^ @]+( +[^ ]+){4}$')",message="cronSpec must be a cron expression of 5 fields separated by spaces (minute hour day-of-month month day-of-week), e.g. \"*/5 * * * *\", or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ @]+( +[^ ]+){4}$') || self.matches('^([*]|[0-5]?[0-9](-[0-5]?[0-9])?)(/[1-9][0-9]*)?(,([*]|[0-5]?[0-9](-[0-5]?[0-9])?)(/[1-9][0-9]*)?)* ')",message="the minute field (1st) of cronSpec must be *, a minute 0-59, a range like 0-29, a list like 0,15,30,45 or a step like */5 or 10-50/10"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ @]+( +[^ ]+){4}$') || self.matches('^[^ ]+ +([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]*)?(,([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]*)?)* ')",message="the hour field (2nd) of cronSpec must be *, an hour 0-23, a range like 9-17, a list like 0,12 or a step like */2"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ @]+( +[^ ]+){4}$') || self.matches('^([^ ]+ +){2}([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]*)?(,([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]*)?)* ')",message="the day-of-month field (3rd) of cronSpec must be * or ?, a day 1-31, a range like 1-15, a list like 1,15 or a step like */2"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ @]+( +[^ ]+){4}$') || self.matches('^([^ ]+ +){3}([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]*)?(,([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]*)?)* ')",message="the month field (4th) of cronSpec must be *, a month 1-12 or JAN-DEC, a range like 1-6 or JAN-JUN, a list like 1,7 or a step like */3"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ @]+( +[^ ]+){4}$') || self.matches('^([^ ]+ +){4}([*?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]*)?(,([*?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]*)?)*$')",message="the day-of-week field (5th) of cronSpec must be * or ?, a day 0-6 (0 is Sunday; 7 is not accepted) or SUN-SAT, a range like 1-5 or MON-FRI, a list like 1,3,5 or a step like */2"
	// +kubebuilder:validation:XValidation:rule="self.replace(' ', ',').split(',').all(t, !t.matches('^([0-9]{1,2}|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|sun|mon|tue|wed|thu|fri|sat))-([0-9]{1,2}|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|sun|mon|tue|wed|thu|fri|sat))(/.*)?$') || (t.split('-')[0].matches('^[0-9]+$') ? int(t.split('-')[0]) : '---janfebmaraprmayjunjulaugsepoctnovdecsunmontuewedthufrisat'.indexOf(t.split('-')[0].lowerAscii()) / 3 % 13) <= (t.split('-')[1].split('/')[0].matches('^[0-9]+$') ? int(t.split('-')[1].split('/')[0]) : '---janfebmaraprmayjunjulaugsepoctnovdecsunmontuewedthufrisat'.indexOf(t.split('-')[1].split('/')[0].lowerAscii()) / 3 % 13))",message="ranges in cronSpec must go from low to high, e.g. 10-30 or MON-FRI rather than 30-10 or FRI-MON"
	CronSpec string `json:"cronSpec"`

	// image is the container image each run starts, e.g.
	// registry.example.com/reports:1.4.2. Pin a version tag or a digest
	// (@sha256:...) rather than :latest, so that every run starts the same
	// code and a change of image is a change of this field. The image's own
	// entrypoint runs; a run succeeds when the container exits 0.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="image must not contain whitespace"
	Image string `json:"image"`

	// replicas is how many pods each run starts at once. Every one of them
	// must succeed for the run to succeed: it is both the parallelism and
	// the completions of the Job each run creates. Defaults to 1; `kubectl
	// scale crontab <name> --replicas=N` sets it too.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Replicas int32 `json:"replicas,omitempty"`

	// timeZone is the time zone cronSpec is read in, a name from the tz
	// database such as Europe/Paris, America/New_York or Etc/UTC. By default
	// the time zone of the cluster's kube-controller-manager, usually UTC.
	// An unknown name is reported on the Ready condition
	// (reason CronJobRejected).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+/-]*$') && self.lowerAscii() != 'local'",message="timeZone must be a name from the tz database, e.g. Europe/Paris or Etc/UTC"
	TimeZone string `json:"timeZone,omitempty"`

	// suspend stops new runs while true; a run in progress goes on.
	// +optional
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`

	// concurrencyPolicy says what happens when a run is due while the
	// previous one still runs: Allow (the default) starts it anyway, Forbid
	// skips it, Replace stops the running one and starts the new one.
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
}

// CronTabStatus is what kubext observes on the CronTab's CronJob.
type CronTabStatus struct {
	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of pods each run starts, as currently set on
	// the CronJob (its Job parallelism). It differs from spec.replicas
	// until kubext has updated the CronJob.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// active is the number of runs (Jobs) in progress.
	// +optional
	Active int32 `json:"active,omitempty"`

	// lastScheduleTime is when the CronJob last started a run.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSuccessfulTime is when a run last succeeded.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// conditions has Ready: True when the CronJob matches the spec (reason
	// Scheduled, or Suspended when spec.suspend is true), False with the
	// reason and message otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CronTab runs a container image on a schedule: kubext keeps a batch/v1
// CronJob of the same name in the same namespace matching it, and puts back
// whatever is changed on that CronJob by hand. Deleting the CronTab deletes
// the CronJob, its Jobs and their pods.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas
// +kubebuilder:resource:path=crontabs,singular=crontab,scope=Namespaced,shortName=ct
// +kubebuilder:printcolumn:name="Spec",type=string,JSONPath=".spec.cronSpec"
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=".spec.image"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=".status.lastScheduleTime"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=".status.active",priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type CronTab struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to run and when.
	// +required
	Spec CronTabSpec `json:"spec"`

	// status is written by kubext from what it observes on the CronJob.
	// +optional
	Status CronTabStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CronTabList is a list of CronTabs.
type CronTabList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CronTab `json:"items"`
}
