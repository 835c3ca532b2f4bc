package main

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

func TestConsumerState(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, ObservedGeneration: 2}
	}
	fixture := func() (*pulsarv1.PulsarConsumer, *appsv1.Deployment) {
		pc := &pulsarv1.PulsarConsumer{
			ObjectMeta: metav1.ObjectMeta{Name: "c", UID: types.UID("pc-uid"), Generation: 2},
			Spec:       pulsarv1.PulsarConsumerSpec{Replicas: ptr.To(int32(2))},
			Status: pulsarv1.PulsarConsumerStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
				Conditions: []metav1.Condition{
					cond(pulsarv1.ConditionAvailable, metav1.ConditionTrue),
					cond(pulsarv1.ConditionProgressing, metav1.ConditionFalse),
					cond(pulsarv1.ConditionDegraded, metav1.ConditionFalse),
				}},
		}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 5, OwnerReferences: []metav1.OwnerReference{
				{Kind: "PulsarConsumer", Name: "c", UID: pc.UID, Controller: ptr.To(true)}}},
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To(int32(2))},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 5, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2},
		}
		return pc, dep
	}
	for name, tc := range map[string]struct {
		change func(*pulsarv1.PulsarConsumer, *appsv1.Deployment) *appsv1.Deployment
		want   state
	}{
		"converged":     {func(_ *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment { return d }, converged},
		"no Deployment": {func(*pulsarv1.PulsarConsumer, *appsv1.Deployment) *appsv1.Deployment { return nil }, pending},
		"Deployment of someone else": {func(_ *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			d.OwnerReferences = nil
			return d
		}, pending},
		"status of an older generation": {func(pc *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			pc.Status.ObservedGeneration = 1
			return d
		}, owned},
		"Deployment not scaled yet": {func(_ *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			d.Spec.Replicas = ptr.To(int32(1))
			return d
		}, reconciled},
		"Deployment controller behind": {func(_ *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			d.Status.ObservedGeneration = 4
			return d
		}, reconciled},
		"a pod not ready": {func(_ *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1
			return d
		}, reconciled},
		"status behind the Deployment": {func(pc *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			pc.Status.ReadyReplicas = 1
			return d
		}, running},
		"still Progressing": {func(pc *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			pc.Status.Conditions[1].Status = metav1.ConditionTrue
			return d
		}, running},
		"condition of an older generation": {func(pc *pulsarv1.PulsarConsumer, d *appsv1.Deployment) *appsv1.Deployment {
			pc.Status.Conditions[0].ObservedGeneration = 1
			return d
		}, running},
	} {
		t.Run(name, func(t *testing.T) {
			pc, dep := fixture()
			dep = tc.change(pc, dep)
			if got := consumerState(pc, dep); got != tc.want {
				t.Errorf("state %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRedisState(t *testing.T) {
	fixture := func() (*cachev1.Redis, *appsv1.StatefulSet) {
		rd := &cachev1.Redis{
			ObjectMeta: metav1.ObjectMeta{Name: "r", UID: types.UID("rd-uid"), Generation: 3},
			Spec:       cachev1.RedisSpec{Size: 2},
			Status: cachev1.RedisStatus{ObservedGeneration: 3, Replicas: 2,
				// What the lab shows: pods run, no Redis answers.
				Members: []cachev1.RedisMember{{Name: "r-0", State: cachev1.MemberUnreachable}, {Name: "r-1", State: cachev1.MemberUnreachable}},
				Conditions: []metav1.Condition{{Type: cachev1.ConditionReady, Status: metav1.ConditionFalse,
					Reason: cachev1.ReasonMembersUnreachable, ObservedGeneration: 3}}},
		}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "r", Generation: 1, OwnerReferences: []metav1.OwnerReference{
				{Kind: "Redis", Name: "r", UID: rd.UID, Controller: ptr.To(true)}}},
			Spec:   appsv1.StatefulSetSpec{Replicas: ptr.To(int32(2))},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 2},
		}
		return rd, sts
	}
	for name, tc := range map[string]struct {
		change func(*cachev1.Redis, *appsv1.StatefulSet)
		want   state
	}{
		"converged, members unreachable": {func(*cachev1.Redis, *appsv1.StatefulSet) {}, converged},
		"status of an older generation":  {func(rd *cachev1.Redis, _ *appsv1.StatefulSet) { rd.Status.ObservedGeneration = 2 }, owned},
		"a pod not ready":                {func(_ *cachev1.Redis, sts *appsv1.StatefulSet) { sts.Status.ReadyReplicas = 1 }, reconciled},
		"a member not looked at yet": {func(rd *cachev1.Redis, _ *appsv1.StatefulSet) {
			rd.Status.Members[1].State = cachev1.MemberPending
		}, running},
		"a member missing":   {func(rd *cachev1.Redis, _ *appsv1.StatefulSet) { rd.Status.Members = rd.Status.Members[:1] }, running},
		"no Ready condition": {func(rd *cachev1.Redis, _ *appsv1.StatefulSet) { rd.Status.Conditions = nil }, running},
	} {
		t.Run(name, func(t *testing.T) {
			rd, sts := fixture()
			tc.change(rd, sts)
			if got := redisState(rd, sts); got != tc.want {
				t.Errorf("state %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	parse := func(text string) map[string]*dto.MetricFamily {
		t.Helper()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	before := parse(`# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="h",method="PATCH"} 3
rest_client_requests_total{code="201",host="h",method="PATCH"} 2
rest_client_requests_total{code="200",host="h",method="GET"} 7
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="redis",name="redis",le="+Inf"} 2
workqueue_queue_duration_seconds_sum{controller="redis",name="redis"} 0.5
workqueue_queue_duration_seconds_count{controller="redis",name="redis"} 2
workqueue_queue_duration_seconds_bucket{controller="other",name="other",le="+Inf"} 1
workqueue_queue_duration_seconds_sum{controller="other",name="other"} 9
workqueue_queue_duration_seconds_count{controller="other",name="other"} 1
`)
	after := parse(`# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="redis",name="redis",le="+Inf"} 6
workqueue_queue_duration_seconds_sum{controller="redis",name="redis"} 0.7
workqueue_queue_duration_seconds_count{controller="redis",name="redis"} 6
`)
	if got := sum(before, "rest_client_requests_total", map[string]string{"method": "PATCH"}); got != 5 {
		t.Errorf("PATCH requests %g, want 5", got)
	}
	if got := sum(before, "rest_client_requests_total", map[string]string{"verb": "PATCH"}); got != 0 {
		t.Errorf("a label the series lack matched: %g", got)
	}
	if got := sum(before, "no_such_metric", nil); got != 0 {
		t.Errorf("a missing metric summed to %g", got)
	}
	// 4 more observations adding 0.2 s: 50 ms each.
	if got := meanMs(before, after, "workqueue_queue_duration_seconds", map[string]string{"name": "redis"}); got < 49.99 || got > 50.01 {
		t.Errorf("mean %g ms, want 50", got)
	}
}
