package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The manager runs in the lab as its deployed service account
// (kubext-system/kubext-controller-manager, as config/default names it):
// its RBAC and the admission policies that restrict it are installed from
// config/default, and the lab's admin credentials impersonate it. Running
// it as system:masters would hide a missing permission, exempt it from the
// policies, and put its requests in the exempt priority level, none of
// which a deployed manager has.
const (
	managerServiceAccount = "kubext-controller-manager"
	managerUser           = "system:serviceaccount:" + SystemNamespace + ":" + managerServiceAccount
	// managerPolicyBinding is one of the bindings InstallManagerAccess
	// applies: its presence says the access is installed.
	managerPolicyBinding = "kubext-manager-node-writes.reboot.kubext.io"
)

var installManager sync.Mutex

// ManagerImpersonation is the deployed manager's identity: its service
// account.
func ManagerImpersonation() rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: managerUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + SystemNamespace, "system:authenticated"},
	}
}

// InstallManagerAccess installs what config/default gives the manager: its
// ServiceAccount, every binding naming it and the roles they grant, the
// admission policies written for it (their names hold "manager-") and the
// FlowSchemas that name it.
func (l *Lab) InstallManagerAccess(ctx context.Context) error {
	installManager.Lock()
	defer installManager.Unlock()
	root, done, err := l.prepareAgentAccess(ctx, managerPolicyBinding)
	if err != nil || done {
		return err
	}
	objs, err := RenderManagerAccess(ctx, filepath.Join(l.K8sDir(), "kubectl"), filepath.Join(root, "config", "default"))
	if err != nil {
		return err
	}
	if err := l.applyObjects(ctx, "manager-access.json", objs); err != nil {
		return err
	}
	l.log("Installed the manager's RBAC and admission policies (%d objects from config/default)", len(objs))
	return nil
}

// RenderManagerAccess renders the kustomization in dir and returns what of
// it gives the manager its access: its ServiceAccount, the Roles and
// ClusterRoles bound to it and their bindings, the admission policies (and
// bindings) whose names hold "manager-", and the FlowSchemas that name it.
func RenderManagerAccess(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	objs, err := renderAccess(ctx, kubectl, dir)
	if err != nil {
		return nil, err
	}
	granted := map[string]bool{} // kind/namespace/name of the roles bound to the manager
	var keep []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount":
			if u.GetName() == managerServiceAccount && u.GetNamespace() == SystemNamespace {
				keep = append(keep, u)
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same subjects and roleRef
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
				return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
			if !slices.ContainsFunc(b.Subjects, isManager) {
				continue
			}
			ns := ""
			if b.RoleRef.Kind == "Role" {
				ns = u.GetNamespace()
			}
			granted[b.RoleRef.Kind+"/"+ns+"/"+b.RoleRef.Name] = true
			keep = append(keep, u)
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.Contains(u.GetName(), "manager-") {
				keep = append(keep, u)
			}
		case "FlowSchema":
			var fs flowcontrolv1.FlowSchema
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &fs); err != nil {
				return nil, fmt.Errorf("FlowSchema %s: %w", u.GetName(), err)
			}
			if slices.ContainsFunc(fs.Spec.Rules, func(r flowcontrolv1.PolicyRulesWithSubjects) bool {
				return slices.ContainsFunc(r.Subjects, func(s flowcontrolv1.Subject) bool {
					return s.ServiceAccount != nil && s.ServiceAccount.Name == managerServiceAccount && s.ServiceAccount.Namespace == SystemNamespace
				})
			}) {
				keep = append(keep, u)
			}
		}
	}
	for _, u := range objs {
		if granted[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] {
			keep = append(keep, u)
		}
	}
	if len(granted) == 0 || !slices.ContainsFunc(keep, func(u *unstructured.Unstructured) bool { return u.GetKind() == "ServiceAccount" }) {
		return nil, fmt.Errorf("kubectl kustomize %s renders no %s ServiceAccount with roles bound to it", dir, managerUser)
	}
	return keep, nil
}

func isManager(s rbacv1.Subject) bool {
	return s.Kind == rbacv1.ServiceAccountKind && s.Name == managerServiceAccount && s.Namespace == SystemNamespace
}

// writeManagerKubeconfig writes the manager's kubeconfig: the lab's admin
// credentials impersonating the manager's service account.
func (l *Lab) writeManagerKubeconfig() (string, error) {
	return writeImpersonating(l.Kubeconfig, ManagerImpersonation(), filepath.Join(l.Dir, "manager.kubeconfig"))
}

// writeImpersonating writes to path the kubeconfig base with every
// credential impersonating imp.
func writeImpersonating(base string, imp rest.ImpersonationConfig, path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(base)
	if err != nil {
		return "", err
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate, a.ImpersonateGroups, a.ImpersonateUserExtra = imp.UserName, imp.Groups, imp.Extra
	}
	return path, clientcmd.WriteToFile(*cfg, path)
}
