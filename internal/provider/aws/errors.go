package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"
)

// Reasons of an Error: short CamelCase words fit for a condition reason.
const (
	// ReasonIAMPermissionMissing: EC2 answered UnauthorizedOperation; the
	// operator's role lacks the action named in the message.
	ReasonIAMPermissionMissing = "IAMPermissionMissing"
	// ReasonSecondaryIPLimit: the ENI already holds as many private IPs as
	// its instance type allows (PrivateIpAddressLimitExceeded).
	ReasonSecondaryIPLimit = "SecondaryIPLimit"
	// ReasonAddressNotInNodeSubnets: no subnet of the node's ENIs contains
	// the (private) address, so EC2 could never assign it there.
	ReasonAddressNotInNodeSubnets = "AddressNotInNodeSubnets"
	// ReasonThrottled: EC2 kept throttling (RequestLimitExceeded) after the
	// SDK's adaptive retryer used all its attempts.
	ReasonThrottled = "Throttled"
	// ReasonEIPQuota: the account's Elastic IP quota is used up
	// (AddressLimitExceeded).
	ReasonEIPQuota = "EIPQuota"
	// ReasonAddressNotFound: EC2 does not know the Elastic IP, allocation or
	// association (InvalidAddress.NotFound and friends), or the address is
	// not in the BYOIP pool.
	ReasonAddressNotFound = "AddressNotFound"
	// ReasonAddressInUse: the address is held by something the provider may
	// not take it from (a primary IP, another IP's Elastic IP).
	ReasonAddressInUse = "AddressInUse"
	// ReasonInstanceNotFound: the node's instance is unknown to EC2 or its
	// spec.providerID is not an EC2 one.
	ReasonInstanceNotFound = "InstanceNotFound"
	// ReasonNetworkInterfaceNotFound: EC2 does not know the ENI.
	ReasonNetworkInterfaceNotFound = "NetworkInterfaceNotFound"
	// ReasonVerificationFailed: after a move, EC2's own description does not
	// show the address where it was put, or still shows it elsewhere.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonSubnetFull: no free private IP was found in the node's subnet
	// for an Elastic IP (public mode).
	ReasonSubnetFull = "SubnetFull"
	// ReasonEC2Error: any other error EC2 returned.
	ReasonEC2Error = "EC2Error"
)

// Error is a failure of the provider, with a condition Reason and a Message
// in plain words that names the EC2 action and EC2's error code.
type Error struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Action is the EC2 action that failed (e.g. AssignPrivateIpAddresses),
	// empty for failures found by the provider itself.
	Action string
	// Code is EC2's error code (e.g. UnauthorizedOperation), if any.
	Code string
	// Message says what happened and what to do, for a condition message.
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying SDK error.
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of the first *Error in err's chain, or
// ReasonEC2Error when there is none.
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonEC2Error
}

// errorf returns an *Error found by the provider itself (no EC2 code).
func errorf(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ec2Error turns an error of the EC2 action into an *Error; what says what
// the call was for ("assign 10.0.1.5 to eni-1").
func ec2Error(action, what string, err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	code, msg := "", err.Error()
	var api smithy.APIError
	if errors.As(err, &api) {
		code, msg = api.ErrorCode(), api.ErrorMessage()
	}
	e := &Error{Action: action, Code: code, Err: err}
	head := fmt.Sprintf("EC2 %s failed (%s)", action, what)
	switch {
	case code == "UnauthorizedOperation" || code == "AccessDenied" || code == "AccessDeniedException":
		e.Reason = ReasonIAMPermissionMissing
		e.Message = fmt.Sprintf("%s: %s: the operator's IAM role is not allowed ec2:%s; add it to the role's policy (see docs/aws.md)", head, code, action)
	case code == "PrivateIpAddressLimitExceeded":
		e.Reason = ReasonSecondaryIPLimit
		e.Message = fmt.Sprintf("%s: %s: the network interface already holds as many private IPv4 addresses as its instance type allows; free one or use an instance type with more", head, code)
	case code == "AddressLimitExceeded":
		e.Reason = ReasonEIPQuota
		e.Message = fmt.Sprintf("%s: %s: the account's Elastic IP quota in this region is used up; release unused Elastic IPs or ask AWS for a higher quota", head, code)
	case code == "RequestLimitExceeded" || code == "Throttling" || code == "ThrottlingException":
		e.Reason = ReasonThrottled
		e.Message = fmt.Sprintf("%s: %s: EC2 kept throttling the operator's API calls after the SDK's retries; it will try again later", head, code)
	case code == "InvalidAddress.NotFound" || code == "InvalidAllocationID.NotFound" || code == "InvalidAssociationID.NotFound" || code == "InvalidIPAddress.NotFound":
		e.Reason = ReasonAddressNotFound
		e.Message = fmt.Sprintf("%s: %s: EC2 does not know this address, allocation or association: %s", head, code, msg)
	case code == "InvalidIPAddress.InUse" || code == "InvalidIPAddress.InUse.Primary" || code == "Resource.AlreadyAssociated" ||
		(code == "InvalidParameterValue" && strings.Contains(strings.ToLower(msg), "in use")):
		e.Reason = ReasonAddressInUse
		e.Message = fmt.Sprintf("%s: %s: the address is already in use elsewhere: %s", head, code, msg)
	case strings.HasPrefix(code, "InvalidInstanceID"):
		e.Reason = ReasonInstanceNotFound
		e.Message = fmt.Sprintf("%s: %s: EC2 does not know the node's instance: %s", head, code, msg)
	case strings.HasPrefix(code, "InvalidNetworkInterfaceID"):
		e.Reason = ReasonNetworkInterfaceNotFound
		e.Message = fmt.Sprintf("%s: %s: EC2 does not know the network interface: %s", head, code, msg)
	case code == "":
		e.Reason = ReasonEC2Error
		e.Message = fmt.Sprintf("%s: %v", head, err)
	default:
		e.Reason = ReasonEC2Error
		e.Message = fmt.Sprintf("%s: %s: %s", head, code, msg)
	}
	return e
}
